from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobsvc.jobs"
    label = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        # Registers the handler configuration's system check (manage.py check, migrate).
        from jobsvc.handlers import setup  # noqa: F401
