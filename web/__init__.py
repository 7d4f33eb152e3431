"""The edge: the Starlette app, the websocket hub and the static pages."""
