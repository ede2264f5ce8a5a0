// Package etcd holds nothing but this module's go.mod: the etcd server
// jobkit's tests run against, pinned as a Go tool at the version in go.mod.
package etcd
