module github.com/tocsin-db/tocsin/bindings/go

go 1.23

require go.uber.org/goleak v1.3.0 // indirect
