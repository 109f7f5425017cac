//! The connection handshake as two I/O-free state machines.
//!
//! ```text
//! client                                  server
//!   Hello {version, options, nonce_c}  ->
//!                                      <-  Challenge {server max version, version, options, nonce_s}
//!   Proof {HMAC(K, "client proof" | T)} ->
//!                                      <-  Ready {HMAC(K, "server proof" | T)}   (first sealed frame)
//! ```
//! `T` is the transcript: both nonces, the client's version, the negotiated version and the
//! options. Frame keys for each direction are derived from K and T. The runtime feeds each
//! complete frame to `on_frame` and sends whatever the step returns; randomness (the nonces)
//! comes from the caller, so the machines stay deterministic and testable.

use crate::auth::{AuthKey, NONCE_LEN, Transcript, macs_equal};
use crate::frame::encode_plain;
use crate::header::PROTOCOL_VERSION;
use crate::{Flags, Frame, Header, Limits, Opcode, ProtoError, Session};

/// Option bit: MAC every payload, for untrusted networks.
pub const OPTION_PAYLOAD_MAC: u8 = 1;
const KNOWN_OPTIONS: u8 = OPTION_PAYLOAD_MAC;

const HELLO_LEN: usize = 4 + NONCE_LEN;
const CHALLENGE_LEN: usize = 4 + NONCE_LEN;
const PROOF_LEN: usize = 32;

/// What the runtime does next.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // Built once per connection; boxing buys nothing.
pub enum Step {
    /// Send these bytes and feed the next frame.
    Send(Vec<u8>),
    /// The session is open; send `reply` first if present.
    Established {
        /// Bytes to send before anything else.
        reply: Option<Vec<u8>>,
        /// The authenticated session.
        session: Session,
    },
}

enum ClientState {
    AwaitChallenge,
    AwaitReady(Transcript),
    Done,
}

/// The client side of the handshake.
pub struct ClientHandshake {
    key: AuthKey,
    nonce: [u8; NONCE_LEN],
    options: u8,
    version: u8,
    limits: Limits,
    state: ClientState,
}

impl ClientHandshake {
    /// Starts a handshake at [`PROTOCOL_VERSION`]; returns the machine and the Hello frame to
    /// send.
    pub fn start(
        key: AuthKey,
        nonce: [u8; NONCE_LEN],
        payload_mac: bool,
        limits: Limits,
    ) -> (ClientHandshake, Vec<u8>) {
        Self::start_at(PROTOCOL_VERSION, key, nonce, payload_mac, limits)
    }

    /// Like [`ClientHandshake::start`], speaking `version` (an older one, to check that a
    /// server still serves older clients). The server must answer with the same version.
    pub fn start_at(
        version: u8,
        key: AuthKey,
        nonce: [u8; NONCE_LEN],
        payload_mac: bool,
        limits: Limits,
    ) -> (ClientHandshake, Vec<u8>) {
        let options = if payload_mac { OPTION_PAYLOAD_MAC } else { 0 };
        let mut payload = [0u8; HELLO_LEN];
        payload[0] = version;
        payload[1] = options;
        payload[4..].copy_from_slice(&nonce);
        let mut header = Header::request(Opcode::Hello, 0);
        header.version = version;
        let hello = encode_plain(header, &payload);
        let machine = ClientHandshake {
            key,
            nonce,
            options,
            version,
            limits,
            state: ClientState::AwaitChallenge,
        };
        (machine, hello)
    }

    /// Feeds one frame from the server.
    pub fn on_frame(&mut self, frame: &Frame) -> Result<Step, ProtoError> {
        if let Some(refused) = frame.refusal() {
            return Err(refused);
        }
        match (&self.state, frame.header.opcode) {
            (ClientState::AwaitChallenge, Opcode::Challenge) => {
                check_plain(frame, Flags::RESPONSE)?;
                self.on_challenge(frame)
            }
            (ClientState::AwaitReady(t), Opcode::Ready) => {
                let t = *t;
                // Ready is sealed: its flags, seq and MAC are checked by the opener.
                check_request_id(frame)?;
                self.on_ready(frame, t)
            }
            (state, got) => Err(ProtoError::UnexpectedFrame {
                got,
                state: match state {
                    ClientState::AwaitChallenge => "waiting for Challenge",
                    ClientState::AwaitReady(_) => "waiting for Ready",
                    ClientState::Done => "already established",
                },
            }),
        }
    }

    fn on_challenge(&mut self, frame: &Frame) -> Result<Step, ProtoError> {
        let p = exact(&frame.payload, CHALLENGE_LEN, "Challenge")?;
        let (server_max, version, options) = (p[0], p[1], p[2]);
        // A server answers with the version the client asked for or refuses it; a session at
        // another version would checksum batches differently from what this side sends.
        if version != self.version {
            return Err(ProtoError::UnsupportedVersion {
                peer: version,
                ours: self.version,
            });
        }
        if options & !KNOWN_OPTIONS != 0 || options & self.options != self.options {
            return Err(ProtoError::BadRequest(format!(
                "server answered with options {options:#04x} to our {:#04x}",
                self.options
            )));
        }
        let _ = server_max;
        let transcript = Transcript {
            client_nonce: self.nonce,
            server_nonce: p[4..].try_into().expect("nonce"),
            client_version: self.version,
            version,
            options,
        };
        let proof = transcript.client_proof(&self.key);
        let mut header = Header::request(Opcode::Proof, 0);
        header.version = version;
        self.state = ClientState::AwaitReady(transcript);
        Ok(Step::Send(encode_plain(header, &proof)))
    }

    fn on_ready(&mut self, frame: &Frame, t: Transcript) -> Result<Step, ProtoError> {
        let (c2s, s2c) = t.frame_keys(&self.key);
        let mut session = Session::new(
            &c2s,
            &s2c,
            t.version,
            t.options & OPTION_PAYLOAD_MAC != 0,
            self.limits,
        );
        session
            .opener
            .verify(&frame.raw_header, &frame.key, &frame.payload, true)?;
        let proof: [u8; 32] = exact(&frame.payload, PROOF_LEN, "Ready")?
            .try_into()
            .expect("32 bytes");
        if !macs_equal(&proof, &t.server_proof(&self.key)) {
            return Err(ProtoError::Unauthorized(
                "the server's proof does not verify (it holds a different auth key)",
            ));
        }
        self.state = ClientState::Done;
        Ok(Step::Established {
            reply: None,
            session,
        })
    }
}

enum ServerState {
    AwaitHello,
    AwaitProof(Transcript),
    Done,
}

/// The server side of the handshake.
pub struct ServerHandshake {
    key: AuthKey,
    nonce: [u8; NONCE_LEN],
    required_options: u8,
    limits: Limits,
    state: ServerState,
}

impl ServerHandshake {
    /// A server handshake with a fresh `nonce`; `require_payload_mac` forces payload MACs
    /// whatever the client asks.
    pub fn new(
        key: AuthKey,
        nonce: [u8; NONCE_LEN],
        require_payload_mac: bool,
        limits: Limits,
    ) -> ServerHandshake {
        ServerHandshake {
            key,
            nonce,
            required_options: if require_payload_mac {
                OPTION_PAYLOAD_MAC
            } else {
                0
            },
            limits,
            state: ServerState::AwaitHello,
        }
    }

    /// Feeds one frame from the client. On error, send
    /// [`crate::frame::encode_refusal`] for that frame and close.
    pub fn on_frame(&mut self, frame: &Frame) -> Result<Step, ProtoError> {
        check_plain(frame, Flags::default())?;
        match (&self.state, frame.header.opcode) {
            (ServerState::AwaitHello, Opcode::Hello) => self.on_hello(frame),
            (ServerState::AwaitProof(t), Opcode::Proof) => {
                let t = *t;
                self.on_proof(frame, t)
            }
            (state, got) => Err(ProtoError::UnexpectedFrame {
                got,
                state: match state {
                    ServerState::AwaitHello => "waiting for Hello",
                    ServerState::AwaitProof(_) => "waiting for Proof",
                    ServerState::Done => "already established",
                },
            }),
        }
    }

    fn on_hello(&mut self, frame: &Frame) -> Result<Step, ProtoError> {
        let p = exact(&frame.payload, HELLO_LEN, "Hello")?;
        let client_version = p[0];
        if client_version > PROTOCOL_VERSION {
            return Err(ProtoError::UnsupportedVersion {
                peer: client_version,
                ours: PROTOCOL_VERSION,
            });
        }
        if client_version == 0 {
            return Err(ProtoError::BadRequest(
                "client version 0 is not valid".into(),
            ));
        }
        if p[1] & !KNOWN_OPTIONS != 0 {
            return Err(ProtoError::BadRequest(format!(
                "unknown handshake options {:#04x}",
                p[1]
            )));
        }
        let options = p[1] | self.required_options;
        let transcript = Transcript {
            client_nonce: p[4..].try_into().expect("nonce"),
            server_nonce: self.nonce,
            client_version,
            version: client_version,
            options,
        };
        let mut payload = [0u8; CHALLENGE_LEN];
        payload[0] = PROTOCOL_VERSION;
        payload[1] = transcript.version;
        payload[2] = options;
        payload[4..].copy_from_slice(&self.nonce);
        let mut header = Header::response(&frame.header, crate::Status::Ok);
        header.opcode = Opcode::Challenge;
        header.version = transcript.version;
        self.state = ServerState::AwaitProof(transcript);
        Ok(Step::Send(encode_plain(header, &payload)))
    }

    fn on_proof(&mut self, frame: &Frame, t: Transcript) -> Result<Step, ProtoError> {
        let proof: [u8; 32] = exact(&frame.payload, PROOF_LEN, "Proof")?
            .try_into()
            .expect("32 bytes");
        if !macs_equal(&proof, &t.client_proof(&self.key)) {
            return Err(ProtoError::Unauthorized(
                "the client's proof does not verify (wrong auth key)",
            ));
        }
        let (c2s, s2c) = t.frame_keys(&self.key);
        let mut session = Session::new(
            &s2c,
            &c2s,
            t.version,
            t.options & OPTION_PAYLOAD_MAC != 0,
            self.limits,
        );
        let mut header = Header::response(&frame.header, crate::Status::Ok);
        header.opcode = Opcode::Ready;
        let ready = session
            .sealer
            .frame(header, &[], &t.server_proof(&self.key));
        self.state = ServerState::Done;
        Ok(Step::Established {
            reply: Some(ready),
            session,
        })
    }
}

/// Handshake frames carry request id 0.
fn check_request_id(frame: &Frame) -> Result<(), ProtoError> {
    if frame.header.request_id != 0 {
        return Err(ProtoError::BadRequest(format!(
            "handshake frame {:?} carries request id {}; handshake frames carry 0",
            frame.header.opcode, frame.header.request_id
        )));
    }
    Ok(())
}

/// Hello, Challenge and Proof are plain: request id, seq and MAC zero, and flags exactly
/// `flags` (`RESPONSE` from the server, none from the client).
fn check_plain(frame: &Frame, flags: Flags) -> Result<(), ProtoError> {
    check_request_id(frame)?;
    let h = &frame.header;
    if h.flags != flags {
        return Err(ProtoError::BadRequest(format!(
            "handshake frame {:?} has flags {:#06x}; expected {:#06x}",
            h.opcode, h.flags.0, flags.0
        )));
    }
    if h.seq != 0 || h.mac != [0; 32] {
        return Err(ProtoError::BadRequest(format!(
            "handshake frame {:?} carries a seq or MAC; plain frames carry zeros",
            h.opcode
        )));
    }
    Ok(())
}

fn exact<'a>(payload: &'a [u8], len: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
    if payload.len() == len {
        Ok(payload)
    } else {
        Err(ProtoError::BadRequest(format!(
            "{what} payload is {} bytes, expected {len}",
            payload.len()
        )))
    }
}
