package RLStream;
# What the stream tests share: the main-context text that loads nginx's
# stream module and ngx_stream_ratelimit_module and holds a stream {} block,
# a counting TCP and UDP upstream, and clients bound to a source address of
# their own (all of 127.0.0.0/8 is local on lo).
#
#   my $up = RLStream::Upstream->new->start;                  # TCP and UDP
#   $t->start($http_body, main => RLStream::main($t, 'server { ... }'));
#   RLStream::tcp($port, from => '127.0.0.2');   # 'ok' (proxied) or '' (closed)
#   my $c = RLStream::tcp_open($port, from => ...);   # held open; undef: closed
#   RLStream::udp($port, from => '127.0.0.2');   # 'ok' or '' (no answer)
#   RLStream::tls($port, 'a.example');           # a ClientHello with SNI
#   $up->count;                                  # connections and datagrams seen
#
# The stream module's .so is the one beside RL_MODULE's (build/); Debian's
# nginx has its stream module dynamic (ngx_stream_module.so, package
# libnginx-mod-stream), loaded first; RL_MODULE=static: both compiled in.
use strict;
use warnings;
use File::Basename qw(dirname);
use Fcntl qw(:flock);
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time sleep);
use RLTest;

# The main-context lines that load the stream modules, and stream { $body }
# (%%PREFIX%% is the test's prefix).
sub main {
    my ($t, $body) = @_;
    my $p = $t->prefix;
    $body =~ s/%%PREFIX%%/$p/g;
    return load_lines($t) . "\nstream {\n$body\n}\n";
}

# The lines that load nginx's stream module (where it is dynamic) and
# ngx_stream_ratelimit_module.
sub load_lines {
    my ($t) = @_;
    return '' if $t->module eq 'static';
    my $load = '';
    if (core_dynamic($t)) {
        my ($dir) = `$t->{nginx} -V 2>&1` =~ /--modules-path=(\S+)/;
        my $core = ($dir // '/usr/lib/nginx/modules') . '/ngx_stream_module.so';
        die "RLStream: $core not found: install libnginx-mod-stream\n" unless -f $core;
        $load .= "load_module $core;\n";
    }
    return $load . 'load_module ' . stream_module($t) . ";\n";
}

# nginx's own stream module is a .so of its own (Debian's), not compiled in
# (a release configured --with-stream, as ./build.sh matrix builds them)
sub core_dynamic {
    my ($t) = @_;
    return `$t->{nginx} -V 2>&1` =~ /--with-stream=dynamic/ ? 1 : 0;
}

sub stream_module {
    my ($t) = @_;
    return dirname($t->module) . '/ngx_stream_ratelimit_module.so';
}

# A TCP client from a source address: what the upstream sent ('ok'), or ''
# when nginx closed the connection first.
sub tcp {
    my ($port, %opt) = @_;
    my $c = tcp_open($port, %opt) or return '';
    close $c;
    return 'ok';
}

# A connection that the upstream answered, kept open; undef if nginx closed
# it (the upstream answers "ok\n" as it accepts).
sub tcp_open {
    my ($port, %opt) = @_;
    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp',
                                  LocalAddr => $opt{from} // '127.0.0.1', Timeout => 5)
        or die "RLStream: connect to $port from " . ($opt{from} // '127.0.0.1') . ": $!\n";
    print $c $opt{send} if defined $opt{send};
    my $got = read_line($c, $opt{timeout} // 5);
    return $got =~ /^ok/ ? $c : undef;
}

sub read_line {
    my ($c, $timeout) = @_;
    my $sel = IO::Select->new($c);
    my $buf = '';
    my $until = time + $timeout;
    while ($buf !~ /\n/ && time < $until) {
        last unless $sel->can_read($until - time);
        my $n = sysread($c, $buf, 256, length $buf);
        last unless $n;
    }
    return $buf;
}

# A UDP datagram from a new socket (a new session) from a source address:
# the upstream's answer ('ok ...'), or '' when none came within the wait.
sub udp {
    my ($port, %opt) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'udp',
                                  LocalAddr => $opt{from} // '127.0.0.1')
        or die "RLStream: udp socket: $!\n";
    send($s, $opt{send} // "ping\n", 0);
    my $buf = '';
    if (IO::Select->new($s)->can_read($opt{wait} // 1)) {
        recv($s, $buf, 512, 0);
    }
    close $s;
    return $buf =~ /^ok/ ? 'ok' : '';
}

# A TLS ClientHello naming $name (server_name), as ssl_preread reads it; the
# upstream answers "ok" as it accepts: 'ok' if proxied, '' if closed.
sub tls {
    my ($port, $name, %opt) = @_;
    return tcp($port, %opt, send => client_hello($name));
}

sub client_hello {
    my ($name) = @_;
    my $sni = "\x00" . pack('n', length($name)) . $name;                      # host_name
    my $ext = pack('n', 0) . pack('n', length($sni) + 2) . pack('n', length($sni)) . $sni;
    my $body = pack('n', 0x0303) . ("\x01" x 32) . "\x00"                         # no session id
             . pack('n', 2) . pack('n', 0x002f) . "\x01\x00"                      # a suite, no compression
             . pack('n', length $ext) . $ext;
    my $hs = "\x01" . substr(pack('N', length $body), 1) . $body;
    return "\x16\x03\x01" . pack('n', length $hs) . $hs;
}

package RLStream::Upstream;
# A TCP and a UDP upstream on one port number: each TCP connection is
# counted as it is accepted and answered "ok\n", then held until its peer
# closes; each UDP datagram is counted and answered "ok ...".
use Fcntl qw(:flock);
use IO::Socket::INET;
use RLTest;

sub new {
    my ($class) = @_;
    my $dir = File::Temp::tempdir('ngx-ratelimit-stream-up-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    RLTest::write_file("$dir/tcp", '');
    RLTest::write_file("$dir/udp", '');
    return bless { dir => $dir, port => RLTest::free_port() }, $class;
}

sub port { $_[0]{port} }

sub start {
    my ($self) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $self->{port}, Listen => 1024,
                                       ReuseAddr => 1) or die "RLStream: listen: $!\n";
    $self->{tcp} = RLTest::tcp_server($listen, sub {
        my ($c) = @_;
        $self->note('tcp');
        syswrite($c, "ok\n");
        1 while sysread($c, my $buf, 4096);
    });
    my $udp = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $self->{port}, Proto => 'udp')
        or die "RLStream: udp: $!\n";
    my $pid = fork() // die "RLStream: fork: $!\n";
    if ($pid == 0) {
        POSIX::setpgid(0, 0);
        while (1) {
            my $from = recv($udp, my $buf, 2048, 0);
            next unless defined $from;
            $self->note('udp');
            send($udp, "ok $buf", 0, $from);
        }
    }
    close $udp;
    $self->{udp} = $pid;
    return $self;
}

sub note {
    my ($self, $kind) = @_;
    open(my $fh, '>>', "$self->{dir}/$kind") or return;
    flock($fh, LOCK_EX);
    print $fh "1\n";
    close $fh;
}

# connections (tcp) or datagrams (udp) seen so far
sub count {
    my ($self, $kind) = @_;
    my $text = RLTest::read_file("$self->{dir}/" . ($kind // 'tcp'));
    return scalar(() = $text =~ /\n/g);
}

sub DESTROY {
    my ($self) = @_;
    local $?;   # the test's exit status stays its own
    for my $pid (grep { $_ } $self->{tcp}, $self->{udp}) {
        kill 'KILL', -$pid;
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

1;
