"""pytest plugin: collects chaos/scenarios/*.yaml as game-day tests (filled in by the chaos work)."""
