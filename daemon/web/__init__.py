"""HTTP: /metrics, /healthz, the webhook, the JSON API and the console, reading one snapshot per cycle.

HTTP: /metrics, /healthz, the Alertmanager webhook (app), the JSON API (api, views, openapi), the console (console/)
and the access tokens (auth). It reads one snapshot per cycle through the read model in backend.py and never imports
the service.
"""
