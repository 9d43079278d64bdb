package RLDNS;
# A DNS server for tests, on a free loopback UDP port: it answers A queries
# for the names it is given (each with one IPv4 address and a TTL), an
# empty answer to any other type of a known name, NXDOMAIN to any other
# name; and it writes each question to a file, so a test can count them.
#
#   my $dns = RLDNS->new('node1.rl.test' => '127.0.0.1')->start;
#   "resolver 127.0.0.1:" . $dns->port . ";"      # in nginx.conf
#   $dns->asked('node1.rl.test');                 # A queries for that name
#   $dns->set('node1.rl.test' => '127.0.0.3');    # answered from now on
#   $dns->set('node1.rl.test' => undef);          # NXDOMAIN from now on
use strict;
use warnings;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX ();
use RLTest;

sub new {
    my ($class, %names) = @_;
    my $dir = tempdir('ngx-ratelimit-dns-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $self = bless { names => {}, dir => $dir, ttl => 300 }, $class;
    $self->set(%names);
    return $self;
}

# The names' addresses, in a file the server reads at each question.
sub set {
    my ($self, %names) = @_;
    $self->{names} = { %{ $self->{names} }, %names };
    delete $self->{names}{$_} for grep { !defined $names{$_} } keys %names;   # undef: NXDOMAIN
    open(my $fh, '>', "$self->{dir}/names.new") or die "RLDNS: $self->{dir}: $!\n";
    print $fh map { "$_ $self->{names}{$_}\n" } sort keys %{ $self->{names} };
    close $fh;
    rename("$self->{dir}/names.new", "$self->{dir}/names") or die "RLDNS: rename: $!\n";
    return $self;
}

sub port { $_[0]{port} }

sub start {
    my ($self) = @_;
    my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'udp')
        or die "RLDNS: cannot bind: $!\n";
    $self->{port} = $sock->sockport;
    my $pid = fork() // die "RLDNS: fork: $!\n";
    if ($pid == 0) {
        open(my $log, '>>', "$self->{dir}/asked") or POSIX::_exit(1);
        $log->autoflush(1);
        while (defined $sock->recv(my $query, 512)) {
            my ($answer, $line) = $self->answer($query);
            print $log "$line\n" if defined $line;
            $sock->send($answer) if defined $answer;
        }
        POSIX::_exit(0);
    }
    $self->{pid} = $pid;
    return $self;
}

# The reply to one query, and the line logged of it ("NAME TYPE").
sub answer {
    my ($self, $query) = @_;
    return if length($query) < 17;
    my ($id, $flags, $qd) = unpack('n n n', $query);
    return if $qd != 1 || $flags & 0x8000;
    my ($pos, @labels) = (12);
    while ($pos < length $query) {
        my $len = ord substr($query, $pos, 1);
        $pos++;
        last if $len == 0;
        push @labels, lc substr($query, $pos, $len);
        $pos += $len;
    }
    return if $pos + 4 > length $query;
    my $question = substr($query, 12, $pos + 4 - 12);
    my ($type) = unpack('n', substr($query, $pos, 2));
    my $name = join '.', @labels;
    my %names = map { split ' ' } split /\n/, RLTest::read_file("$self->{dir}/names");
    my $addr = $names{$name};
    my @an = defined $addr && $type == 1
           ? (pack('n n n N n', 0xc00c, 1, 1, $self->{ttl}, 4) . pack('C4', split /\./, $addr))
           : ();
    my $rcode = defined $addr ? 0 : 3;
    my $header = pack('n n n n n n', $id, 0x8580 | $rcode, 1, scalar @an, 0, 0);
    return ($header . $question . join('', @an), "$name " . ($type == 1 ? 'A' : $type));
}

# The A queries asked for $name so far.
sub asked {
    my ($self, $name) = @_;
    return scalar grep { $_ eq "$name A" } split /\n/, RLTest::read_file("$self->{dir}/asked");
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

sub DESTROY { $_[0]->stop }

1;
