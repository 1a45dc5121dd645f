"""Job handlers: what running a job means (``base``), the built-ins and their registry.

- ``base``: ``JobContext`` and the ``Handler`` protocol; ``errors``: the outcome errors;
- ``registry``: handlers by name, built from settings; ``validation``: the API's check;
- ``record`` (``default``), ``http``, ``kafka``: the built-in handlers; ``http`` keeps its
  URL rules in ``http_policy``, its pinned connection in ``http_transport`` and its
  request signature in ``signing``.
"""
