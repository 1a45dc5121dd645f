"""The OpenAPI document, generated once per process, with the rules serializers cannot
state.

It depends only on the code and the settings, both fixed for the life of a process, while
generating it walks every view and serializer (tens of milliseconds). The endpoint needs
no authentication, so each process builds it once and serves that copy.
"""

from __future__ import annotations

import threading
from typing import Any

from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from jobsvc.accounts import schema as accounts_schema
from jobsvc.jobs import schema as jobs_schema


class SchemaApi(SpectacularAPIView):
    _schemas: dict[Any, dict] = {}  # by API version
    _lock = threading.Lock()

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        with self._lock:
            schema = self._schemas.get(version)
            if schema is None:
                generator = self.generator_class(
                    urlconf=self.urlconf, api_version=version, patterns=self.patterns
                )
                schema = generator.get_schema(request=request, public=self.serve_public)
                self._schemas[version] = schema
        filename = self._get_filename(request, version)
        return Response(
            data=schema, headers={"Content-Disposition": f'inline; filename="{filename}"'}
        )


def add_rules(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: the rules of request bodies that JSON Schema
    states and serializers cannot (``COMPONENT_RULES`` of the jobs and the accounts), and
    the bodies that may not be left out."""
    schemas = result.get("components", {}).get("schemas", {})
    for name, rules in {**accounts_schema.COMPONENT_RULES, **jobs_schema.COMPONENT_RULES}.items():
        if name in schemas:
            schemas[name].update(rules)
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            body = operation.get("requestBody")
            if body and operation.get("operationId") in jobs_schema.BODY_REQUIRED_OPERATIONS:
                body["required"] = True
    return result
