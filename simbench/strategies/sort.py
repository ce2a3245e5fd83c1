"""Strategy module sort: registered once implemented."""
