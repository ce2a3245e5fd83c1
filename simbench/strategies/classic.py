"""Strategy module classic: registered once implemented."""
