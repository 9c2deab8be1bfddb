"""Observation records (added with the delivery engine); never values, tokens, cursors or stamps."""
