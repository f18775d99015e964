//! A real `redis-server` for one test: its own port on 127.0.0.1, its own
//! temporary directory, no persistence, stopped on drop.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for a fresh server to answer PING.
const STARTUP: Duration = Duration::from_secs(10);

/// Ports tried before a test gives up starting its server.
const PORT_TRIES: usize = 20;

/// Set under CI: a missing `redis-server` fails the tests that need it.
const REQUIRED: &str = "LLM_RETRY_REQUIRE_REDIS";

/// Whether `redis-server` can be run.
fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// The TLS port, when the server also listens with TLS.
    tls_port: Option<u16>,
}

impl RedisServer {
    /// Starts a server on a free port. When `redis-server` is not
    /// installed the test fails, saying why, if `LLM_RETRY_REQUIRE_REDIS`
    /// is set (`.ci/run` sets it); otherwise it says on stderr that it
    /// skipped, and this is `None`.
    pub fn start() -> Option<RedisServer> {
        if !installed() {
            assert!(
                std::env::var_os(REQUIRED).is_none(),
                "redis-server is not installed, and {REQUIRED} is set: these tests \
                 need a real Redis (Debian: apt-get install redis-server; .ci/run \
                 installs it)"
            );
            // Past the test harness's capture: a skip is seen in any run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: redis-server is not installed, so this test of shared \
                 state did not run (set {REQUIRED} to make that a failure)"
            );
            return None;
        }
        let port = free_port();
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "llm-retry-redis-{}-{}-{port}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory for redis-server");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            tls_port: None,
        };
        // A port free when asked may be another test's server by the time
        // this one binds it: then that server answers, and this one, its
        // bind refused, is gone. Another port, then.
        for _ in 0..PORT_TRIES {
            if server.start_here() {
                return Some(server);
            }
            server.port = free_port();
        }
        panic!("redis-server found no free port in {PORT_TRIES} tries");
    }

    /// Starts a server that also listens with TLS, on a second port, with
    /// a certificate for 127.0.0.1 signed by a throwaway CA (`ca_file`),
    /// both made by the `openssl` tool. Without `redis-server` or `openssl`,
    /// as [`start`](RedisServer::start) does without `redis-server`.
    pub fn start_tls() -> Option<RedisServer> {
        let tool = Command::new("openssl")
            .arg("version")
            .stdout(Stdio::null())
            .status();
        if tool.is_err() {
            assert!(
                std::env::var_os(REQUIRED).is_none(),
                "openssl is not installed, and {REQUIRED} is set: the TLS test makes \
                 its certificates with it (Debian: apt-get install openssl)"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: openssl is not installed, so this test of TLS to Redis did not run"
            );
            return None;
        }
        let mut server = RedisServer::start()?;
        make_certificates(&server.dir);
        for _ in 0..PORT_TRIES {
            server.tls_port = Some(free_port());
            if server.start_here() {
                return Some(server);
            }
        }
        panic!("redis-server found no free TLS port in {PORT_TRIES} tries");
    }

    /// `rediss://127.0.0.1:<TLS port>/` (of a server from `start_tls`).
    pub fn tls_url(&self) -> String {
        format!(
            "rediss://127.0.0.1:{}/",
            self.tls_port.expect("started with TLS")
        )
    }

    /// The CA the TLS certificate is signed by, in PEM.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The port a client can reach and the server (once restarted) uses.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh server, empty, on the same port, and waits for PING.
    pub fn restart(&mut self) {
        assert!(
            self.start_here(),
            "redis-server could not take back port {}: another process holds it",
            self.port
        );
    }

    /// Starts a fresh server on this port and waits until it answers;
    /// false when another process answers there instead (this one's bind
    /// was refused) or this one exited.
    fn start_here(&mut self) -> bool {
        self.kill();
        let mut command = Command::new("redis-server");
        if let Some(tls_port) = self.tls_port {
            let file = |name: &str| self.dir.join(name);
            command
                .args(["--tls-port", &tls_port.to_string(), "--tls-cert-file"])
                .arg(file("server.crt"))
                .arg("--tls-key-file")
                .arg(file("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(file("ca.crt"))
                .args(["--tls-auth-clients", "no"]);
        }
        let spawned = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed: these tests need a real Redis \
                 (Debian: apt-get install redis-server; .ci/run installs it)"
            ),
            Err(error) => panic!("redis-server did not start: {error}"),
        };
        let pid = child.id();
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if let Some(answering) = self.answering_pid() {
                if answering == pid {
                    return true;
                }
                self.kill();
                return false;
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|child| !matches!(child.try_wait(), Ok(None)));
            if exited {
                self.kill();
                return false;
            }
            assert!(
                started.elapsed() < STARTUP,
                "redis-server on port {} did not answer within {STARTUP:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id of the server answering on the port, from `INFO
    /// server`: `None` while nothing answers there.
    fn answering_pid(&self) -> Option<u32> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.write_all(b"INFO server\r\n").ok()?;
        let mut reader = BufReader::new(stream);
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let len: usize = header.strip_prefix('$')?.trim().parse().ok()?;
        let mut body = vec![0; len];
        reader.read_exact(&mut body).ok()?;
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|line| line.strip_prefix("process_id:")?.trim().parse().ok())
    }

    /// Sends `command` (RESP inline) on a new connection and returns at
    /// once, without reading the answer: for `DEBUG SLEEP`, which holds
    /// the whole server.
    pub fn send_without_waiting(&self, command: &str) -> TcpStream {
        let mut stream =
            TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).expect("connect to redis-server");
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .expect("send to redis-server");
        stream
    }

    /// Waits until the server stops answering PING within `patience`: it
    /// is busy (held by `DEBUG SLEEP`, say). Panics after ten seconds.
    pub fn wait_until_stalled(&self, patience: Duration) {
        let started = Instant::now();
        while self.answers_ping_within(patience) {
            assert!(
                started.elapsed() < STARTUP,
                "redis-server on port {} kept answering",
                self.port
            );
        }
    }

    /// Whether the server does not answer a PING within 50 ms: still
    /// asleep.
    pub fn stalled(&self) -> bool {
        !self.answers_ping_within(Duration::from_millis(50))
    }

    fn answers_ping_within(&self, patience: Duration) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(patience));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `openssl` in `dir` with `args`; panics, saying why, if it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.crt`) and, signed by it, a certificate for 127.0.0.1
/// (`server.crt`, `server.key`), in `dir`: P-256 keys, valid two days.
fn make_certificates(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"]);
    ca.extend(["-subj", "/CN=llm-retry test CA"]);
    openssl(dir, &ca);
    let mut request = vec!["req"];
    request.extend(ec);
    request.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &request);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write the certificate's extensions");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("its address").port()
}
