from django.apps import AppConfig


class ObservationsConfig(AppConfig):
    name = "controlplane.observations"
    label = "observations"
    verbose_name = "Hikyo operator observations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import got_request_exception

        from controlplane.observations import healing, login_throttle

        login_throttle.connect()
        got_request_exception.connect(
            healing.heal_after_request_error, dispatch_uid="hikyo-heal-store"
        )
