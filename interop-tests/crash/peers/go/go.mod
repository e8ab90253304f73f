module tocsin-crash-peer

go 1.23

require github.com/tocsin-db/tocsin/bindings/go v0.0.0

replace github.com/tocsin-db/tocsin/bindings/go => ../../../../bindings/go
