"""Run-directory layout and byte moving (local spool -> shared storage); no torch here."""
