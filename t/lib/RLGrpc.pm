package RLGrpc;
# A real gRPC server and client for a test, from Debian's python3-grpcio
# (t/lib/grpc_peer.py: generic handlers, no generated code).
#
#   use RLGrpc;                       # skips the test, saying why, without them
#   my $g = RLGrpc->new->start;       # the server, on a free loopback port
#   my @r = $g->call("127.0.0.1:$port", { method => '/rl.Test/Unary',
#                    metadata => [['x-key', 'a']] }, ...);   # one result a call
#   $g->stop;
#
# A test using it is skipped where there is no python3-grpcio (./build.sh
# test installs it) or the nginx under test has no HTTP/2 module.
use strict;
use warnings;
use File::Temp qw(tempdir);
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use IO::Handle;
use JSON::PP;
use POSIX ();
use RLH2;
use RLTest;
use Test::More ();

my $python = $ENV{RL_PYTHON} // '/usr/bin/python3';
my $peer = dirname(abs_path(__FILE__)) . "/grpc_peer.py";
my @running;

sub import {
    my $why = missing();
    Test::More::plan(skip_all => $why) if $why;
}

# Why gRPC cannot be tested here, or undef.
sub missing {
    return "$python has no grpc module: ./build.sh test installs python3-grpcio (or set RL_PYTHON)"
        if system("$python -c 'import grpc' >/dev/null 2>&1") != 0;
    return RLH2::missing() || undef;
}

# The server block lines of an h2c listener (RLH2's).
sub h2c_listen { RLH2::listen_line(@_) }

sub new {
    my ($class) = @_;
    my $dir = tempdir('ngx-ratelimit-grpc-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    return bless { dir => $dir, port => RLTest::free_port() }, $class;
}

sub port { $_[0]{port} }
sub dir  { $_[0]{dir} }

sub start {
    my ($self) = @_;
    pipe(my $rd, my $wr) or die "RLGrpc: pipe: $!\n";
    my $pid = fork() // die "RLGrpc: fork: $!\n";
    if ($pid == 0) {
        close $rd;
        open(STDOUT, '>&', $wr);
        open(STDERR, '>>', "$self->{dir}/server.log");
        exec($python, $peer, 'server', $self->{port}, $self->{dir}) or POSIX::_exit(127);
    }
    close $wr;
    $self->{pid} = $pid;
    push @running, $pid;
    my $line = <$rd> // '';
    die "RLGrpc: the gRPC server did not start:\n" . RLTest::read_file("$self->{dir}/server.log")
        unless $line =~ /^ready/;
    $self->{out} = $rd;
    return $self;
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'KILL', $pid;
    waitpid($pid, 0);
    @running = grep { $_ != $pid } @running;
}

# The calls, one after the other: their results (grpc_peer.py says what
# they hold), with the metadata also as hashes (initial_md, trailing_md).
sub call {
    my ($self, $target, @calls) = @_;
    my $json = encode_json(\@calls);
    my $out = `$python $peer call $target \Q$json\E 2>>$self->{dir}/client.log`;
    my $r = eval { decode_json($out) }
        or die "RLGrpc: the client failed:\n$out" . RLTest::read_file("$self->{dir}/client.log");
    for my $c (@$r) {
        $c->{initial_md} = { map { @$_ } @{ $c->{initial} } };
        $c->{trailing_md} = { map { @$_ } @{ $c->{trailing} } };
    }
    return @$r;
}

# A client started in the background, its results read by wait_call.
sub call_background {
    my ($self, $target, @calls) = @_;
    my $json = encode_json(\@calls);
    my $pid = open(my $fh, '-|', $python, $peer, 'call', $target, $json) // die "RLGrpc: $!\n";
    return { pid => $pid, fh => $fh };
}

sub wait_call {
    my ($self, $bg) = @_;
    my $out = do { local $/; readline($bg->{fh}) } // '';
    close $bg->{fh};
    my $r = decode_json($out);
    return @$r;
}

END { kill 'KILL', @running if @running }

1;
