"""Strategy module spfhp: registered once implemented."""
