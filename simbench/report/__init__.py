"""Reports: tables, summaries and plots written atomically from simulation results."""
