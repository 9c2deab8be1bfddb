"""The Django control plane: settings, observation records, dashboard, management commands."""
