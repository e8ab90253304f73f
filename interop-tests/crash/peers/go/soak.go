package main

import (
	"context"
	"fmt"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func runSoak(ctx context.Context, db *tocsin.DB, mode string) error {
	return fmt.Errorf("unknown mode %q", mode)
}
