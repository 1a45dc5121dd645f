"""Request serializers that refuse the fields they do not declare."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class KnownFieldsOnly(serializers.Serializer):
    """A field the serializer does not declare is a 400, never ignored: a misspelt option
    would otherwise silently take its default. The OpenAPI schema says so too
    (``additionalProperties: false``, ``jobsvc.api.schema_view``)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields), key=str)
            if unknown:
                known = ", ".join(self.fields)
                raise serializers.ValidationError(
                    {name: [f"Unknown field; one of {known}."] for name in unknown}
                )
        return super().to_internal_value(data)
