package job

// Signature returns the Go type of the job's executor, as reflect spells
// it ("func(context.Context, int, int) (int, error)"). Two processes that
// register one kind with different signatures disagree about its
// arguments or results; remote executors announce it to jobd, which
// refuses a worker whose signature for a kind differs from that of
// another connected worker.
func (j *Job) Signature() string {
	if j == nil || j.exec == nil {
		return ""
	}
	return j.exec.typ.String()
}
