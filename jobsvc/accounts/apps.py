from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "jobsvc.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from jobsvc.accounts import (  # noqa: F401  (registrations)
            login_failures,  # the failed log-in signal's receiver
            schema,  # the OpenAPI auth scheme
        )
