"""Reports of a read: JSON (archival), Markdown, PNG figures, atomic writes, resumable reads."""
