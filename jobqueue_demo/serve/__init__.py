"""`serve`: a lesson run as a web page the whole class follows (docs/architecture.md).

Imported only by `serve`: the web stack (starlette, uvicorn) stays off every other command's start-up."""
