"""The API's routes, one module per resource, each an `APIRouter` (`router`) that `collector.api.app` includes.
A route parses its request and returns what a view module (`collector.api.runs`, `series`, `alerts`, ...)
builds; the views hold no HTTP, so the CLI calls them directly when no collector runs."""
