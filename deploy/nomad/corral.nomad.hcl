# corral's daemon on every client node of a Nomad cluster: a system job
# (one allocation per eligible node), run on the host by raw_exec as root.
#   nomad job run corral.nomad.hcl
# raw_exec must be enabled in the clients' configuration
# (plugin "raw_exec" { config { enabled = true } }), and corral installed
# as /usr/local/bin/corral on each node.
#
# Why raw_exec and not docker or exec: corral makes a cgroup per session
# shell and per oneshot and kills whole trees by them, and a new daemon
# takes shells over by their host pid; a container's pid namespace and
# cgroup would hide both.
#
# Where the sessions live decides whether they outlive the daemon: as
# shipped, a session's shell is in a cgroup below the task's, and Nomad
# kills every process of the task's cgroup when it stops or restarts the
# task (a job update, a drain of the node): the sessions end with it, their
# records stay and the next daemon marks them down. For sessions that
# outlive the task, set CORRAL_CGROUP_ROOT (below) to a cgroup2 directory
# outside Nomad's (a slice made at boot); the cost: those trees are not
# accounted to the allocation, and only `corral kill` ends them. Not
# tested here.
job "corral" {
  type = "system"

  group "corral" {
    network {
      port "health" {
        static = 9470
      }
    }

    # Nomad's own service catalogue (no Consul needed) with two checks:
    # liveness restarts the task after 3 failures, readiness keeps the
    # service out of the catalogue while the daemon recovers or drains.
    service {
      name     = "corral"
      provider = "nomad"
      port     = "health"

      check {
        name     = "alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "3s"

        check_restart {
          limit = 3
          grace = "10s"
        }
      }

      check {
        name     = "ready"
        type     = "http"
        path     = "/readyz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 10
      interval = "5m"
      delay    = "2s"
      mode     = "delay"
    }

    task "daemon" {
      driver = "raw_exec"
      user   = "root"

      config {
        command = "/usr/local/bin/corral"
        # --health on the node's address that Nomad gave the port, so its
        # checks and a scraper reach it; --drain-timeout leaves room in
        # kill_timeout for the last results and closing the store.
        args = [
          "daemon",
          "--health", "${NOMAD_IP_health}:${NOMAD_PORT_health}",
          "--log-format", "json",
          "--drain-timeout", "25s",
        ]
      }

      env {
        CORRAL_STATE_DIR = "/var/lib/corral"
        # CORRAL_CGROUP_ROOT = "/sys/fs/cgroup/corral.slice" # sessions outside the task's cgroup (see above)
      }

      # SIGTERM starts the drain; Nomad sends SIGKILL after kill_timeout.
      # A client caps kill_timeout at its max_kill_timeout (30s by
      # default), hence the 25s drain.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 100
        memory = 128
      }
    }
  }
}
