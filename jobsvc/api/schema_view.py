"""The OpenAPI document, generated once per process.

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
