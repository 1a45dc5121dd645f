from django.apps import AppConfig


class ExecutorWorkerConfig(AppConfig):
    name = "executor_worker"
    verbose_name = "Executor worker"
