from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobsvc.jobs"
    label = "jobs"
    verbose_name = "Jobs"
