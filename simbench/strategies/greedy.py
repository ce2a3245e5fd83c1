"""Strategy module greedy: registered once implemented."""
