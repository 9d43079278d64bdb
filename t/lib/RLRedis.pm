package RLRedis;
# A private redis-server for a test: Debian's, on a free loopback port, no
# persistence, in its own temporary directory; stopped at exit.
#
#   my $redis = RLRedis->new->start;
#   RLRedis->new(host => '127.0.0.2', port => $redis->port)   # another server, same port
#   $redis->cmd('SET', 'k', 'v');       # one command, its reply (arrays as refs)
#   $redis->stop; $redis->start;        # the same port again
#
#   my $tls = RLRedis->new(tls => RLCerts::make(), auth_clients => 'yes')->start;
#   $tls->tls_port;                     # TLS there (cmd still uses port)
use strict;
use warnings;
use Digest::SHA qw(sha256_hex);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(sleep time);
use RLTest;
use Test::More ();

my @running;

# A test that uses Redis is skipped, saying why, where there is none
# (./build.sh test installs Debian's redis-server).
sub import {
    my $server = $ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server';
    Test::More::plan(skip_all => "$server is not installed: ./build.sh test installs redis-server "
                     . '(or set RL_REDIS_SERVER)') unless -x $server;
}

sub new {
    my ($class, %opt) = @_;
    my $dir = tempdir('ngx-ratelimit-redis-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $port = $opt{port} // ($opt{cluster} ? cluster_port() : RLTest::free_port());
    my @args = @{ $opt{args} // [] };
    push @args, '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'
        if $opt{cluster};
    my $tls_port;
    if (my $c = $opt{tls}) {
        # with tls-cluster yes, a node's cluster bus is its TLS port + 10000
        $tls_port = $opt{cluster} ? cluster_port() : RLTest::free_port();
        push @args, '--tls-port', $tls_port, '--tls-cert-file', $c->{server_crt}, '--tls-key-file', $c->{server_key},
            '--tls-ca-cert-file', $c->{ca}, '--tls-auth-clients', $opt{auth_clients} // 'optional';
    }
    return bless { dir => $dir, port => $port, tls_port => $tls_port, args => \@args, host => $opt{host} // '127.0.0.1',
                   server => $ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server' }, $class;
}

sub port { $_[0]{port} }
sub host { $_[0]{host} }   # its loopback address: 127.0.0.1, or another of 127/8
sub tls_port { $_[0]{tls_port} }
sub log_text { RLTest::read_file("$_[0]{dir}/redis.log") }

# Whether this redis-server speaks TLS (Debian's does): '' if so, else why.
sub tls_missing {
    my $server = $ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server';
    # the second directive is refused anyway: the first only without TLS
    my $out = `'$server' --port 0 --tls-port 0 --ratelimit-probe 1 2>&1`;
    return $out =~ />>> 'tls-port/ ? "$server is built without TLS" : '';
}

# A cluster node also listens on its port + 10000 (the cluster bus): a
# port of the test's own (RLTest::free_port, 10000 to 19999) whose bus port
# is free too.
sub cluster_port {
    for (1 .. 100) {
        my $p = RLTest::free_port();
        return $p if RLTest::port_bindable($p + 10000);
    }
    die "RLRedis: no free port pair for a cluster node\n";
}
# Three masters of a Redis Cluster (no replicas), joined by redis-cli,
# each with the options of new() that $opt->($i) gives for node $i (1 to
# 3), cluster on; dies unless the cluster is up.
sub cluster {
    my ($class, $opt) = @_;
    my @nodes = map { $class->new(cluster => 1, %{ $opt ? $opt->($_) : {} })->start } 1 .. 3;
    my $create = `redis-cli --cluster create @{[ join ' ', map { '127.0.0.1:' . $_->port } @nodes ]} --cluster-replicas 0 --cluster-yes 2>&1`;
    RLTest::wait_until(sub { !grep { ($_->cmd('CLUSTER', 'INFO') // '') !~ /cluster_state:ok/ } @nodes }, 20)
        or die "RLRedis: the cluster is not up:\n$create";
    return @nodes;
}

# Which of a cluster's masters (@$nodes) holds the state of a key value:
# the module puts it in the slot of "{" 16 hex digits of SHA-256(key) "}".
sub master_of {
    my ($nodes, $key) = @_;
    my $slot = $nodes->[0]->cmd('CLUSTER', 'KEYSLOT', '{' . substr(sha256_hex($key), 0, 16) . '}');
    my ($master) = grep { my $n = $_; grep { $_->[0] <= $slot && $slot <= $_->[1] } slots_of($n) } @$nodes;
    return ($master, $slot);
}

# The slot ranges a master serves ([first, last] each).
sub slots_of {
    my ($n) = @_;
    my $id = $n->cmd('CLUSTER', 'MYID');
    return map { [ $_->[0], $_->[1] ] } grep { $_->[2][2] eq $id } @{ $n->cmd('CLUSTER', 'SLOTS') };
}

# 60 keys ($prefix-1 ...) of a location limited to 3 (GET $path), 5 requests
# each through the nginx servers of @$fleet in turn: whether exactly 3
# passed for each, and how many keys each node of @$nodes holds.
sub three_of_five {
    my ($fleet, $nodes, $path, $prefix) = @_;
    my $exact = 1;
    for my $k (1 .. 60) {
        my @s = map { $fleet->[ $_ % @$fleet ]->get($path, { 'X-Key' => "$prefix-$k" })->{status} } 1 .. 5;
        $exact &&= "@s" eq '200 200 200 429 429';
    }
    return ($exact, map { $_->cmd('DBSIZE') } @$nodes);
}

sub auth { $_[0]{auth} = $_[1]; $_[0] }
sub db   { $_[0]{db} = $_[1]; $_[0] }

sub start {
    my ($self) = @_;
    my $pid = fork() // die "RLRedis: fork: $!\n";
    if ($pid == 0) {
        open(STDOUT, '>>', "$self->{dir}/redis.log");
        open(STDERR, '>&', \*STDOUT);
        exec($self->{server}, '--port', $self->{port}, '--bind', $self->{host}, '--save', '',
             '--appendonly', 'no', '--dir', $self->{dir}, '--daemonize', 'no', '--loglevel', 'warning',
             '--enable-debug-command', 'local', @{ $self->{args} })
            or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    push @running, $pid;
    RLTest::wait_until(sub { $self->connect }, 10) or die "RLRedis: redis-server did not start\n";
    delete $self->{sock};
    return $self;
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    delete $self->{sock};
    kill 'KILL', $pid;
    waitpid($pid, 0);
    @running = grep { $_ != $pid } @running;
}

sub pause  { kill 'STOP', $_[0]{pid} }
sub resume { kill 'CONT', $_[0]{pid} }

sub connect {
    my ($self) = @_;
    $self->{sock} = IO::Socket::INET->new(PeerAddr => $self->{host}, PeerPort => $self->{port}, Proto => 'tcp');
    return $self->{sock};
}

# One command on a fresh connection (after AUTH and SELECT if auth/db are
# set); the reply: a scalar, or an array ref.
sub cmd {
    my ($self, @args) = @_;
    my $s = $self->connect or die "RLRedis: cannot connect\n";
    for my $pre ([ AUTH => $self->{auth} ], [ SELECT => $self->{db} ]) {
        next unless defined $pre->[1];
        print $s "*2\r\n\$" . length($pre->[0]) . "\r\n$pre->[0]\r\n\$" . length($pre->[1]) . "\r\n$pre->[1]\r\n";
        read_reply($s);
    }
    my $req = '*' . @args . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @args);
    print $s $req;
    return read_reply($s);
}

sub read_reply {
    my ($s) = @_;
    my $line = <$s> // die "RLRedis: no reply\n";
    $line =~ s/\r\n$//;
    my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
    return $rest if $type eq '+' or $type eq ':';
    return "ERR:$rest" if $type eq '-';
    if ($type eq '$') {
        return undef if $rest < 0;
        my $buf = '';
        read($s, $buf, $rest + 2);
        return substr($buf, 0, $rest);
    }
    return [ map { read_reply($s) } 1 .. $rest ] if $type eq '*';
    die "RLRedis: bad reply $line\n";
}

END {
    local $?;
    kill 'KILL', $_ for @running;
    waitpid($_, 0) for @running;
}

1;
