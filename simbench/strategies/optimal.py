"""Strategy module optimal: registered once implemented."""
