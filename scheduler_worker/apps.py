from django.apps import AppConfig


class SchedulerWorkerConfig(AppConfig):
    name = "scheduler_worker"
    verbose_name = "Scheduler worker"
