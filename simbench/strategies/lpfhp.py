"""Strategy module lpfhp: registered once implemented."""
