"""The dashboard's two groups (issue 10 item 6): ``hikyo-viewers`` may view the observation
models, ``hikyo-operators`` may also force a resync. A user in neither sees nothing (no app in
the admin index, 403 on its URLs). Members also need ``is_staff`` to log in to the admin.

Permissions are normally created after all migrations (post_migrate); on a fresh database they
do not exist yet here, so this migration creates the observation app's own first.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEWERS = "hikyo-viewers"
OPERATORS = "hikyo-operators"
MODELS = ("trackedobject", "reconcilerun", "conditionchange", "eventrecord", "statusreport")
VIEW = tuple(f"view_{model}" for model in MODELS)
FORCE = ("force_resync",)


def create_groups(apps, schema_editor):
    config = apps.get_app_config("observations")
    config.models_module = True  # the historical app has none; create_permissions needs one
    try:
        create_permissions(config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    finally:
        config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")

    def permissions(codenames):
        found = list(
            permission_model.objects.filter(
                content_type__app_label="observations", codename__in=codenames
            )
        )
        missing = set(codenames) - {p.codename for p in found}
        if missing:
            raise RuntimeError(f"permissions missing: {sorted(missing)}")
        return found

    viewers, _ = group_model.objects.get_or_create(name=VIEWERS)
    viewers.permissions.add(*permissions(VIEW))
    operators, _ = group_model.objects.get_or_create(name=OPERATORS)
    operators.permissions.add(*permissions(VIEW + FORCE))


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=(VIEWERS, OPERATORS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("observations", "0004_dashboard"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
