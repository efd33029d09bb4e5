"""Search everything: one full-text index of records, wiki pages, automations and
conversations, kept in step on every flush, and read as the reader may read."""
