package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/internal/tlsdir"
)

func tlsCommand(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "tls",
		Short: "Make the certificates of remote corral: a CA, the daemon's, clients'",
		Long: `Make and revoke the credentials a daemon serving over TCP and its clients
authenticate each other with (mutual TLS 1.3, Ed25519 keys).

'tls init DIR' makes a CA, a server certificate and one client in DIR;
'tls issue DIR' writes a client directory for another identity; 'tls revoke
DIR NAME' puts every certificate of NAME on DIR's revocation list, which a
running daemon rereads. A client certificate's name is the identity the
daemon logs and authorizes; a read-only one may list and read but not run or
kill.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	c.AddCommand(tlsInitCommand(stdout), tlsIssueCommand(stdout), tlsRevokeCommand(stdout), tlsLsCommand(stdout))
	return c
}

func tlsInitCommand(stdout io.Writer) *cobra.Command {
	var (
		hosts   []string
		client  string
		expires string
		force   bool
	)
	c := &cobra.Command{
		Use:   "init DIR [--host NAME|IP]... [--client NAME] [--expires D] [--force]",
		Short: "Make a CA, a server certificate and a client certificate in DIR",
		Long: `Make in DIR (created 0700) a certificate authority (ca.pem, ca-key.pem),
the daemon's certificate for each --host (server.pem, server-key.pem;
localhost, 127.0.0.1 and ::1 if none is given), one client certificate
(client.pem, client-key.pem; named by --client, "admin" by default, valid
for a year), an empty revocation list (crl.pem) and the index of issued
certificates (index.json). Key files are 0600.

The CA and the server certificate are valid for --expires (default 10y).
A DIR that already holds a CA is refused unless --force is given, which
replaces it and invalidates every certificate it issued.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			validity, err := parseValidity(expires)
			if err != nil {
				return err
			}
			opts := tlsdir.InitOptions{Hosts: hosts, Client: client, Validity: validity, Force: force}
			if err := tlsdir.Init(args[0], opts); err != nil {
				return tlsErr(err)
			}
			if client == "" {
				client = tlsdir.DefaultClient
			}
			fmt.Fprintf(stdout, "made a CA, a server certificate and client %q in %s\n", client, args[0])
			return nil
		},
	}
	c.Flags().StringArrayVar(&hosts, "host", nil, "a DNS name or IP address the server certificate is valid for (repeatable)")
	c.Flags().StringVar(&client, "client", "", "the name of the client certificate made with the CA (default \"admin\")")
	c.Flags().StringVar(&expires, "expires", "", "validity of the CA and server certificate: 10y, 90d, 36h (default 10y)")
	c.Flags().BoolVar(&force, "force", false, "replace an existing CA, invalidating every certificate it issued")
	return c
}

func tlsIssueCommand(stdout io.Writer) *cobra.Command {
	var (
		client   string
		readOnly bool
		expires  string
		out      string
	)
	c := &cobra.Command{
		Use:   "issue DIR --client NAME [--read-only] [--expires D] --out CLIENTDIR",
		Short: "Write a client directory for another identity, signed by DIR's CA",
		Long: `Issue a client certificate for NAME (1-64 characters of A-Z a-z 0-9 . _ -),
signed by the CA in DIR and recorded in DIR's index, and write CLIENTDIR
(created 0700) with ca.pem, client.pem and client-key.pem: a client's
--tls directory. --read-only marks the certificate (OU=read-only): the
daemon lets it list and read but not run or kill. The certificate is valid
for --expires (default 1y), never past the CA. A CLIENTDIR that already
holds client credentials is refused. Issuing a name again (a renewal) is
allowed; revoking it revokes every certificate of the name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if client == "" {
				return usageErr("tls issue: --client NAME is required")
			}
			if out == "" {
				return usageErr("tls issue: --out CLIENTDIR is required")
			}
			validity, err := parseValidity(expires)
			if err != nil {
				return err
			}
			is, err := tlsdir.Issue(args[0], client, tlsdir.IssueOptions{ReadOnly: readOnly, Validity: validity}, out)
			if err != nil {
				return tlsErr(err)
			}
			access := "read-write"
			if is.ReadOnly {
				access = "read-only"
			}
			fmt.Fprintf(stdout, "issued %q (%s, serial %s, expires %s) to %s\n", is.Name, access, is.Serial,
				is.NotAfter.Format(time.RFC3339), out)
			return nil
		},
	}
	c.Flags().StringVar(&client, "client", "", "the client's name: its identity to the daemon")
	c.Flags().BoolVar(&readOnly, "read-only", false, "the client may list and read, not run or kill")
	c.Flags().StringVar(&expires, "expires", "", "validity: 1y, 90d, 36h (default 1y)")
	c.Flags().StringVar(&out, "out", "", "the client directory to write")
	return c
}

func tlsRevokeCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke DIR NAME",
		Short: "Revoke every certificate issued to NAME",
		Long: `Add every certificate DIR's CA issued to NAME to DIR's revocation list
(crl.pem). A daemon serving with DIR refuses them from its next handshake
on, without a restart; connections already open are not cut.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			revoked, err := tlsdir.Revoke(args[0], args[1])
			if err != nil {
				return tlsErr(err)
			}
			for _, r := range revoked {
				fmt.Fprintf(stdout, "revoked %q serial %s\n", r.Name, r.Serial)
			}
			return nil
		},
	}
}

func tlsLsCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "ls DIR",
		Short: "List the certificates DIR's CA issued",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := tlsdir.List(args[0])
			if err != nil {
				return tlsErr(err)
			}
			w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tACCESS\tSERIAL\tEXPIRES\tREVOKED")
			for _, is := range list {
				access, revoked := "read-write", "-"
				if is.ReadOnly {
					access = "read-only"
				}
				if is.RevokedAt != nil {
					revoked = is.RevokedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", is.Name, access, is.Serial, is.NotAfter.Format(time.RFC3339), revoked)
			}
			return w.Flush()
		},
	}
}

// tlsErr maps a tlsdir error to an exit code: bad input is a usage error,
// a refusal (existing CA, unknown name, unsafe permissions) is 1, anything
// else is corral's own failure.
func tlsErr(err error) error {
	code := exitInternal
	switch {
	case errors.Is(err, tlsdir.ErrInvalid):
		return usageErr("tls: %v", err)
	case errors.Is(err, tlsdir.ErrExists), errors.Is(err, tlsdir.ErrUnknownName),
		errors.Is(err, tlsdir.ErrAlreadyRevoked), errors.Is(err, tlsdir.ErrUnsafe):
		code = 1
	}
	return &exitError{code: code, msg: "tls: " + err.Error()}
}

// parseValidity reads --expires: a Go duration (36h) or a whole number of
// days (90d) or years of 365 days (1y). Empty means the default (0).
func parseValidity(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	bad := usageErr("--expires %q: want a positive duration such as 1y, 90d or 36h", s)
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 || days > 100*365 {
			return 0, bad
		}
		d = time.Duration(days) * 24 * time.Hour
	} else if n, ok := strings.CutSuffix(s, "y"); ok {
		years, err := strconv.Atoi(n)
		if err != nil || years <= 0 || years > 100 {
			return 0, bad
		}
		d = time.Duration(years) * 365 * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			return 0, bad
		}
	}
	return d, nil
}
