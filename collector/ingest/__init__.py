"""Files to the store: the incremental reader, the bulk reader, tailing, checkpoint scans."""
