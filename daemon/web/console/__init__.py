"""The web console at /ui/: pages rendered on the server (Starlette + Jinja2), charts as inline SVG."""
