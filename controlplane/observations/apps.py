from django.apps import AppConfig


class ObservationsConfig(AppConfig):
    name = "controlplane.observations"
    label = "observations"
    verbose_name = "Hikyo operator observations"
    default_auto_field = "django.db.models.BigAutoField"
