"""Strategy module nnlshp: registered once implemented."""
