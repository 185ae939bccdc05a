module switchboard.test/caller

go 1.25
