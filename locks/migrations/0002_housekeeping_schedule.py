"""Schedule lock housekeeping in the database, where beat's DatabaseScheduler reads it.

Operators change the interval, pause or trigger the task in the admin (Periodic tasks); this
migration only creates it once and never overwrites their edits.
"""

from django.db import migrations
from django.utils import timezone

TASK_NAME = "Lock housekeeping"
TASK = "locks.housekeeping"


def interval_seconds():
    # locks.housekeeping.INTERVAL_SECONDS; a migration keeps the value it was written with.
    return 10


def create_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    db = schema_editor.connection.alias
    every = interval_seconds()
    # IntervalSchedule has no unique constraint, so get_or_create could meet duplicates.
    schedule = (IntervalSchedule.objects.using(db).filter(every=every, period="seconds")
                .order_by("pk").first())
    if schedule is None:
        schedule = IntervalSchedule.objects.using(db).create(every=every, period="seconds")
    _, created = PeriodicTask.objects.using(db).get_or_create(
        name=TASK_NAME,
        defaults={
            "task": TASK,
            "interval": schedule,
            # A tick not started within one interval is dropped; the next one does its work.
            "expire_seconds": every,
            "description": "Remove expired locks and the locks of spent tokens "
                           "(locks.housekeeping.run_housekeeping).",
        },
    )
    if created:
        _tell_running_beat(PeriodicTasks, db)


def remove_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    db = schema_editor.connection.alias
    task = PeriodicTask.objects.using(db).filter(name=TASK_NAME).first()
    if task is None:
        return
    schedule = task.interval
    task.delete()
    if schedule is not None and not PeriodicTask.objects.using(db).filter(
            interval=schedule).exists():
        schedule.delete()
    _tell_running_beat(PeriodicTasks, db)


def _tell_running_beat(PeriodicTasks, db):
    # Historical models skip PeriodicTask.save(), which is what normally bumps this row; a beat
    # that is already running reloads its schedule only when it changes. Later releases of
    # django-celery-beat may rename the column; then there is nothing to bump here.
    if any(field.name == "last_update" for field in PeriodicTasks._meta.get_fields()):
        PeriodicTasks.objects.using(db).update_or_create(
            ident=1, defaults={"last_update": timezone.now()})


class Migration(migrations.Migration):

    dependencies = [
        ("locks", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.RunPython(create_schedule, remove_schedule),
    ]
