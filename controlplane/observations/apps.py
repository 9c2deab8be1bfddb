from django.apps import AppConfig


class ObservationsConfig(AppConfig):
    name = "controlplane.observations"
    label = "observations"
    verbose_name = "Hikyo operator observations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.observations import login_throttle

        login_throttle.connect()
