package wire

// Detached commands and resuming them (see the package doc, Calls).
//
// An Exec with "detach":true asks the daemon to keep the command going if
// its client goes away (a closed connection, a cut link noticed by
// keepalive, a client that stops reading), instead of stopping it. The
// daemon's first frame of such a call is a Job frame ('J', {"job":ID}):
// the id under which it keeps the command's output (bounded: the newest
// bytes, up to the daemon's bound per job) and, once the command ends,
// its result.
//
//	{"call":"resume","resume":{"job":ID,"offset":N}}
//
// streams that job's output from byte N of its whole output (stdout and
// stderr counted together, in the order the daemon sent them: the offset
// of a byte is how many output bytes the daemon had sent before it), as
// Stdout and Stderr frames, then its Result (or Error) as the last frame,
// as an exec call ends; while the command runs, new output follows as it
// comes. During a resume the client may send cancel and kill frames, as
// during an exec; not stdin. An offset older than what the job keeps, or
// past what it has produced, is refused (bad_request, naming the range
// kept); an unknown job is not_found.

// FrameJob is the daemon's first frame of a detached exec: Job.
const FrameJob byte = 'J'

// CallResume continues a detached job's output (Resume).
const CallResume = "resume"

// Job names a detached command.
type Job struct {
	Job string `json:"job"`
}

// Resume is what a resume call continues: the job, from which byte of its
// output.
type Resume struct {
	Job    string `json:"job"`
	Offset int64  `json:"offset"`
}
