module github.com/tocsin-db/tocsin/bindings/go

go 1.23
