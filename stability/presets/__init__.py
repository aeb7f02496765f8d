"""Paper presets: one TOML file per figure (runs or a sweep, and the paper's claims), read, run and judged."""
