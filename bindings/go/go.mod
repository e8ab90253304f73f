module github.com/tocsin-db/tocsin/bindings/go

go 1.23

require (
	github.com/mattn/go-sqlite3 v1.14.32
	go.uber.org/goleak v1.3.0
)
