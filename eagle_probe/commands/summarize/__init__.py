"""`eagle-probe summarize`: read every rank's log lines, build one report, render it as text or HTML."""
