"""Reading stored runs: findings in words (diagnosis), and runs grouped over seeds (groups)."""
