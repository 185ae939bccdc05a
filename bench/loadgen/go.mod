module switchboard/bench/loadgen

go 1.22
