"""CLI commands, one module per group; each module has `register(app)` adding its commands."""
