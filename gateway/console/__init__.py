"""The admin console in the browser, under ``/console`` (``GATEWAY_CONSOLE``): sign-in with an admin key
or JWT into a server-side session, then the overview (live), keys, groups, usage, requests and audit
pages.

- :mod:`~gateway.console.pages`: the routes, the session and CSRF checks, the pages;
- :mod:`~gateway.console.key_pages`, :mod:`~gateway.console.group_pages`: the keys' and groups' pages;
- :mod:`~gateway.console.forms`: their forms' fields, read and refused field by field (pure);
- :mod:`~gateway.console.sessions`: the sessions (pure);
- :mod:`~gateway.console.live`: the overview's TTFT, decode and acceptance figures (pure);
- :mod:`~gateway.console.request_pages`: the request log (filters, pages) and one request's figures;
- :mod:`~gateway.console.usage_pages`: usage over time (drawn by the vendored uPlot) and its exports;
  :mod:`~gateway.console.series`: its windows, buckets and series (pure);
- ``templates/`` (Jinja2, autoescaped) and ``static/`` (its CSS, its script and ``vendor/``: uPlot),
  served by the gateway itself: the console works with no Internet access.
"""
