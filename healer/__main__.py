from healer.cli import entry

entry()
