from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "jobsvc.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from jobsvc.accounts import schema  # noqa: F401  (registers the OpenAPI auth scheme)
