package redisscript

// Option configures a Redis-protocol store; redisstore and valkeystore
// export it under their own names, so both plugins take the same options.
type Option func(*Options)

// Options are what an Option sets.
type Options struct {
	// Namespace of the store's keys; DefaultNamespace when empty.
	Namespace string
}

// WithNamespace keeps the store's data under keys "jobkit:{ns}:...", apart
// from other namespaces on the same server. ns must not hold braces.
// Defaults to "default".
func WithNamespace(ns string) Option { return func(o *Options) { o.Namespace = ns } }

// Apply returns the options opts set, defaults filled in.
func Apply(opts []Option) Options {
	o := Options{Namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
