"""What a run leaves: its row and config (records), its metric rows (the store), and exports."""
